"""Single-member models. The ensemble transform (ensemble.py) stacks them; models never name
mesh axes except the BatchNorm reduction axis they are given."""
