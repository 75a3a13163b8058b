"""The storage layer: where studies live, the spool and journal that keep every result, and
the checks a resume or a foreign database must pass before anything is written."""
