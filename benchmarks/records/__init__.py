"""What a benchmark record is: its schema and parsing, the metric catalogue, outcomes, summaries, error
classes, the like-with-like series keys, the noise rule and the peer formats. Pure: no model, view or task.
"""
