"""Reading a study's results: the front and the recommendation, how trials ended and why,
where the time went, and what the progress lines and `best` say."""
