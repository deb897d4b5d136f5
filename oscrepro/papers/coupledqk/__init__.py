"""Paper `coupledqk`: see README.md in this folder for the table index."""
