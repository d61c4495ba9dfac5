"""The OpenAPI page (/docs), with Swagger UI served by this server itself.

FastAPI's own page loads Swagger UI from a CDN and its favicon from fastapi.tiangolo.com, so on
the isolated hosts and clusters inference servers often run on it renders blank. The assets come
from the swagger-ui-bundle-v2 package (Swagger UI 5, the first major release that renders the
OpenAPI 3.1 schemas FastAPI writes), mounted as static files. ReDoc has no such package and is not
offered. Swagger UI's online validator is turned off: it would send the schema to swagger.io.
"""

from __future__ import annotations

import swagger_ui_bundle
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"


def install(app: FastAPI) -> None:
    """Serves the page at /docs; the app must be made with docs_url=None and redoc_url=None."""
    app.mount(
        ASSETS_PATH,
        StaticFiles(directory=str(swagger_ui_bundle.swagger_ui_path)),
        name="swagger-ui-assets",
    )

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        # Behind a proxy that strips a prefix (root_path), every URL the page loads needs it back.
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=root + app.openapi_url,
            title=f"{app.title} - API",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )
