"""What every graph front end shares: the step from a ModelGraph to a SourceResult (``result``), and
the readers of a mixer's state from a graph (``scan``: a scan's or delta rule's state from the
dataflow; ``states``: from the graph's state inputs)."""
