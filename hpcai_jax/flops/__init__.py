"""FLOP accounting: XLA's cost analysis of compiled programs, and the paper's Table 3 rules."""
