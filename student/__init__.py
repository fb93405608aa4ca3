"""The student: the only released model, trained on privately labelled public data."""
