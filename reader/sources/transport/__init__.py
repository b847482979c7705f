"""The HTTP plumbing under the remote stores, apart from the stores themselves (as httpx keeps its
transports apart from its client): the HTTP/1.1 client (http1/), proxies.py (which proxy a URL takes,
and the one client factory), tls.py (the trust), redirects.py, retry.py (what a cut read may
retry), body.py (a response body counted and landed), scatter.py and multirange.py (several
ranges in one answer), contentrange.py (the one parser of `Content-Range`), parallel.py (a big
range as parts over several connections), speed.py (the link's round trip and rate), options.py
(HttpOptions, S3Settings).

Nothing here knows a store: the stores (the modules of the package above) use these.
"""
