"""A small torch program for `cprof run`: the window opens before it imports torch, and its
record_function range and (with --record-shapes) module calls must still be recorded."""
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


net = Net()
with torch.no_grad(), torch.profiler.record_function("forward_pass"):
    y = net(torch.ones(2, 8))
print(tuple(y.shape))
