"""One router per resource: health, store (info, index tables), entries, msas, metrics."""
