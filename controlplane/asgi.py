"""One ASGI application: Django for HTTP, Channels for websockets."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
# Django must be set up before anything imports models, so the consumers come after this.
django_http = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from controlplane.routing import websocket_urlpatterns  # noqa: E402
from controlplane.ws_auth import TokenAuthMiddleware  # noqa: E402
from controlplane.ws_origins import SameOriginValidator  # noqa: E402

# daphne serves no files of its own: with DEBUG on (the quick start), Django serves the static
# files from the apps' folders; with DEBUG off, whitenoise (a middleware, see settings) serves
# the collected STATIC_ROOT.
application = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_http) if settings.DEBUG else django_http,
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns)))
        ),
    }
)
