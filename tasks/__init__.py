"""One module per audit stage: pure, vectorised functions plus one thin Prefect task each."""
