"""An installed app whose ``tasks`` module the backend's catalog discovers."""
