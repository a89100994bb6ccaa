"""Keras files (.keras archives, legacy .h5 models): reader, config claims, front end."""
