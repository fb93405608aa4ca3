"""The student: the only released model, trained on privately labelled public data.

Modules: :mod:`pate.student.train` (``train_student``, ``Student``: FixMatch or supervised), with
:mod:`pate.student.inputs` (what may reach the student, checked), :mod:`pate.student.trainer`
(one training run: network, optimiser, random draws, the epoch loop) and
:mod:`pate.student.checkpoint` (its checkpoint and weights files); :mod:`pate.student.augment` (weak/strong augmentations on torch tensors), :mod:`pate.student.select`
(first-k and active query selection with Interactive-GNMax) and :mod:`pate.student.evaluate`
(accuracy, per-class accuracy, confusion matrix). Importing ``pate.student`` itself does not import
torch.
"""
