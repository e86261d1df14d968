"""Contracts shared by app, engine and relay. Imports neither torch, Qt, llama.cpp, nor the engine or relay."""
