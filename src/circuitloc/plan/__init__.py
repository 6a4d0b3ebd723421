"""What runs while Snakemake plans the workflow: config loading and validation, the vocabulary,
hub names, resource estimates, the code hash, the sweep's expansion, the config views the rules
read. Standard library, yaml and jsonschema only (tests/unit/test_layers.py), so planning stays fast in
any Python."""
