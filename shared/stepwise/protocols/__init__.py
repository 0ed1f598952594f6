"""The protocol doors: thin translations of other protocols onto Stepwise's runs, no second engine."""
