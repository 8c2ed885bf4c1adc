"""Matches between players: the arena's library (`arena`: `run_arena`, `ArenaWorkers`,
`elo_interval`) and each training iteration's matches (`evaluation`). The command line is
`amazons.arena`, on top. Importing the package imports nothing.
"""
