"""Imports torch (the stand-in in fake_torch/ when the test puts it first on PYTHONPATH)."""
import torch

print(torch.__name__)
