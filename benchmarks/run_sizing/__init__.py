"""Sizing beside the history: a run's flags and measured workload as the sizing form's inputs, the measured
speed and server reports of the same model beside the estimate, "explain this run", and the sizing page that
shows them. The sizing core (sizing/) stays pure and never imports the history; this side imports it."""
