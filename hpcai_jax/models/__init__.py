"""Single-member models: ResNet v1.5 (resnet.py), Faster R-CNN C4 (faster_rcnn.py) and their
int8 form (int8.py). The engine stacks members' parameters and maps them; models never name
mesh axes except the BatchNorm reduction axis they are given, and build their convolutions with
the `conv_general_dilated` they are given (flax's nn.Conv argument: the engine's members' form)."""
