"""Every outbound connection a tenant or the model can aim: the SSRF guard (which addresses may be
reached) and the outbound bounds (how long and how much)."""
