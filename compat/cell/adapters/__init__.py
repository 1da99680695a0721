"""The compat adapters, the cell's half: the fixes to speculators' generator (generator.py) and the executor
subclass they put in MultiprocExecutor's place (executor.py); the worker half is compat/worker/adapter_extension.py.
"""
