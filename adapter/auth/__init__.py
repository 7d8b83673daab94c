"""Delegated authentication and authorization for the aggregated API server (docs/api.md §6).

Entry points: :func:`adapter.auth.factory.add_auth_flags`, :func:`adapter.auth.factory.build_auth`,
:class:`adapter.auth.middleware.AuthMiddleware`.
"""
