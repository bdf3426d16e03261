"""What is measured about a run rather than run: collective traffic from the HLO, energy
counters, memory, profiles and TensorBoard events, and the MLLOG writer. FLOP counts live in
flops/."""
