"""kvlab's database backends: Django's, with what kvlab changes about them."""
