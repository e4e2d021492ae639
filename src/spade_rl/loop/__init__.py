"""The self-play loop: the phases of one SPADE iteration, and the run that repeats them."""
