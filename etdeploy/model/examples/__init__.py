"""Built-in examples: real models on real data that ships with a package."""
