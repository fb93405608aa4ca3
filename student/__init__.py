"""The student: the only released model, trained on privately labelled public data (its modules:
docs/architecture.md, docs/student.md). Importing ``pate.student`` itself does not import torch.
"""
