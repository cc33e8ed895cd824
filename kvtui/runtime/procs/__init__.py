"""Process bookkeeping, a floor package: every process kvtui starts is tracked here so that none
outlives it.

reaper (the registry of live server groups, the escalating stop, the exit and signal handlers),
watchdog (the process that stops them when kvtui is killed -9), leftovers (the per-process registry
files a later run reads), servers (the plain helper servers of tests and benches), tracker
(multiprocessing's resource tracker, reaped before kvtui exits). It imports only the floor.
"""
