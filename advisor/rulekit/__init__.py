"""What a rule author imports: the rule API, the engine that runs rules, severity, fix helpers
and graph patterns.
"""
