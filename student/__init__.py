"""The student: the only released model, trained on privately labelled public data.

Modules: :mod:`pate.student.train` (``train_student``, ``Student``: FixMatch or supervised),
:mod:`pate.student.augment` (weak/strong augmentations on torch tensors), :mod:`pate.student.select`
(first-k and active query selection with Interactive-GNMax) and :mod:`pate.student.evaluate`
(accuracy, per-class accuracy, confusion matrix). Importing ``pate.student`` itself does not import
torch.
"""
