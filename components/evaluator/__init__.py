"""The Evaluator: TFMA with confidence intervals; a drop vs the baseline refuses only when significant."""
