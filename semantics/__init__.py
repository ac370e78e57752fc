"""The formal semantics of Turnout made executable: small-step rules, a structured evaluator, z3 encodings."""
