"""The installed app's entry point (Briefcase); see ``__main__``."""
