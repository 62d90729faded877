"""Who is calling: users and their sessions, passwords and the login limiter, trial code's allocation
tokens and what they open, and whether the master may listen where it was told to."""
