"""The N-to-1 shared-memory inference server and its client (`server`): numpy only.

It serves any evaluator factory it is handed (the network's is `amazons.neural.served`, a layer
above), so it never imports the network. Importing the package imports nothing.
"""
