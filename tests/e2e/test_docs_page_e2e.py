"""/docs renders without network access: every asset the page loads is served by the server."""

import re

from support.server import ServerProcess

# Where an HTML page or Swagger UI's config names something to load.
_REFERENCES = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|\burl\s*:\s*["']([^"']+)["']""")


def test_the_docs_page_loads_only_assets_this_server_serves(tmp_path):
    server = ServerProcess(tmp_path / "artifacts").start()
    try:
        with server.client() as client:
            page = client.get("/docs")
            assert page.status_code == 200, page.text
            assert page.headers["content-type"].startswith("text/html")
            html = page.text
            assert "http://" not in html and "https://" not in html and "//cdn" not in html
            references = [a or b for a, b in _REFERENCES.findall(html)]
            assert sorted(references) == [
                "/docs/assets/favicon-32x32.png",
                "/docs/assets/swagger-ui-bundle.js",
                "/docs/assets/swagger-ui.css",
                "/openapi.json",
            ]
            types = {}
            for reference in references:
                response = client.get(reference)
                assert response.status_code == 200, reference
                assert len(response.content) > 0, reference
                types[reference.rsplit(".", 1)[-1]] = response.headers["content-type"]
            assert types["js"].startswith(("text/javascript", "application/javascript"))
            assert types["css"].startswith("text/css")
            assert types["json"].startswith("application/json")
            # FastAPI writes OpenAPI 3.1, which Swagger UI renders from major release 5 on.
            assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
            bundled = re.search(
                rb'PACKAGE_VERSION:"(\d+)\.',
                client.get("/docs/assets/swagger-ui-bundle.js").content,
            )
            assert bundled and int(bundled.group(1)) >= 5
            assert client.get("/redoc").status_code == 404
            assert "/docs" not in client.get("/openapi.json").json()["paths"]
    finally:
        server.stop()
