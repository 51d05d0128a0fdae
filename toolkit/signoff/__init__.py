"""Pre-deployment signoff (policy → criteria → verdict), accuracy regression between two report folders, and
the environment doctor. See toolkit.signoff.policy for the policy format."""
