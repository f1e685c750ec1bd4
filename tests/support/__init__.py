"""Test support: broker launchers, test data and fault hooks that the runtime package does not ship."""
