"""Guest-side assets, shipped as package data: each runtime's manifest and the driver code that runs inside the sandbox."""
