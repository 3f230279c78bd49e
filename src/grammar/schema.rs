//! JSON schema -> GBNF.
