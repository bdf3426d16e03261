"""What is measured about a run rather than run: FLOP counts and their cross-check, collective
traffic from the HLO, the roofline, energy, memory, and the MLLOG writer."""
