"""The GitHub Action: typed inputs and outputs, the step summary, its own entry point."""
