"""The cost model: one training step priced per GPU in named stages, over numpy columns of layouts.

:func:`supercluster.perf.step.step_columns` runs the stages in order; each is a function over small
frozen array dataclasses, in its own module:

========================  =========================================================================
``columns``               layouts <-> integer columns (:class:`~.columns.Rows`), parallel groups
``compute``               per-layer FLOPs and bytes priced on the GPU (:class:`~.compute.LayerWork`)
``comm``                  TP, CP and EP collectives per layer (:class:`~.comm.CommTimes`)
``pipeline``              a stage's work, the schedule's bubble and sends (:class:`~.pipeline.StageTimes`)
``sync``                  data-parallel gradient / parameter sync and the optimizer (:class:`~.sync.SyncTimes`)
``memory``                bytes per GPU on the most loaded stage
``step``                  the ledger, FLOP accounting, :class:`~.step.StepBreakdown`
========================  =========================================================================
"""
