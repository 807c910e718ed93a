"""Execution plane: the run queue. Runs are inserted by the scheduler; every later
change to a run (lease, start, finish, cancel) belongs to this plane."""
