"""The metadata store: one async interface, two backends (etcd and embedded).

Everything durable that is not entry data lives here (DESIGN.md §5). Use :func:`open_store`
to get a backend from a URL; program against :class:`api.MetadataStore`.
"""
