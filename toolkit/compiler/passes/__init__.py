"""Compiler passes, one per module; each registers itself (toolkit.compiler.registry). Their run order is
toolkit.compiler.stages."""
