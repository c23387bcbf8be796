"""`difftest blame`: which hunks of a branch's change make each of its findings (`search.py`),
measured set by set on the base (`subsets.py`)."""
