"""The networks: encoders, heads, the actor-critic and Q networks, recurrent cores, observation
normalisation, the numpy actor, and the trained-policy adapter (``load_policy``/``export_policy``)."""
