"""Teacher ensembles: data loading, model zoo, and training all teachers at once."""
