"""The protocol doors: one module per protocol, translating its requests and events onto the same runs."""
