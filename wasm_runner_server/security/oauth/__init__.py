"""OAuth 2.0 for apps acting for members: scopes, the store, the authorization server (Authlib)."""
