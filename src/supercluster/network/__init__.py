"""Networks: the two-level scale-up / scale-out model, sized fabrics, their flows and costs."""
