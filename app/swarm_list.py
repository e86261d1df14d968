"""Fetches a relay's public swarms (``GET /swarms``, wire/swarm_list.py) for the join page, without blocking the UI.

Qt's own networking (one request at a time; a new one replaces the one in flight), a timeout, and a cap on the
answer's size: the relay is whatever address the volunteer typed. Outcomes are two signals: ``listed`` with the
swarms, or ``failed`` with one line to show.

A relay with a private CA is read as the node reads it (engine/sharing/swarm_client.py): trusting ``ca_file``'s CA,
or, with an invite's certificate fingerprint (``ca_sha256``), trusting exactly that certificate and nothing else.
"""

from __future__ import annotations

from PySide6.QtCore import QCryptographicHash, QObject, QUrl, Signal
from PySide6.QtNetwork import (QNetworkAccessManager, QNetworkReply, QNetworkRequest, QSslCertificate,
                               QSslConfiguration, QSslError)

from wire.swarm_list import MAX_LIST_BYTES, decode_swarm_list, swarms_url

TIMEOUT_MS = 8000


class SwarmLister(QObject):
    listed = Signal(list)  # list[wire.swarm_list.PublicSwarm]
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._net = QNetworkAccessManager(self)
        self._reply: QNetworkReply | None = None

    def fetch(self, relay: str, ca_sha256: str | None = None, ca_file: str | None = None) -> None:
        """Ask the relay (its first URL) for its public swarms; the answer comes as ``listed`` or ``failed``."""
        self.cancel()
        try:
            url = swarms_url(relay)
        except ValueError as exc:
            self.failed.emit(str(exc))
            return
        request = QNetworkRequest(QUrl(url))
        request.setTransferTimeout(TIMEOUT_MS)
        if ca_file and url.startswith("https:") and not ca_sha256:
            certs = QSslCertificate.fromPath(ca_file)
            if not certs:
                self.failed.emit(f"the relay CA file {ca_file} holds no PEM certificate")
                return
            tls = QSslConfiguration.defaultConfiguration()
            tls.addCaCertificates(certs)
            request.setSslConfiguration(tls)
        reply = self._reply = self._net.get(request)
        reply.downloadProgress.connect(self._on_progress)
        if ca_sha256 and url.startswith("https:"):
            reply.sslErrors.connect(lambda errors: self._pinned(reply, errors, ca_sha256))
        reply.finished.connect(lambda: self._on_finished(reply, url, ca_sha256))

    @staticmethod
    def _fingerprint(reply: QNetworkReply) -> str:
        cert = reply.sslConfiguration().peerCertificate()
        return "" if cert.isNull() else bytes(cert.digest(QCryptographicHash.Algorithm.Sha256).toHex().data()).decode()

    def _pinned(self, reply: QNetworkReply, errors: list[QSslError], ca_sha256: str) -> None:
        """A self-signed relay or a private CA: its certificate is trusted when it is exactly the pinned one."""
        if self._fingerprint(reply) == ca_sha256:
            reply.ignoreSslErrors(errors)

    def cancel(self) -> None:
        reply, self._reply = self._reply, None
        if reply is not None:
            reply.abort()  # its finished signal still comes, for a reply no longer current: ignored
            reply.deleteLater()

    def _on_progress(self, received: int, _total: int) -> None:
        if received > MAX_LIST_BYTES and self._reply is not None:
            self._reply.abort()

    def _on_finished(self, reply: QNetworkReply, url: str, ca_sha256: str | None = None) -> None:
        if reply is not self._reply:
            return
        self._reply = None
        reply.deleteLater()
        # Checked whatever the TLS errors were: a certificate a public CA vouches for is still not the invited one.
        seen = self._fingerprint(reply) if ca_sha256 and url.startswith("https:") else ""
        if seen and seen != ca_sha256:  # (no certificate seen: the relay was not reached, said below)
            self.failed.emit(f"could not list the swarms at {url}: the relay's certificate is not the one the invite "
                             f"pins (sha256 {ca_sha256[:12]}...)")
            return
        if reply.error() != QNetworkReply.NetworkError.NoError:
            if reply.error() == QNetworkReply.NetworkError.OperationCanceledError:
                why = f"over {MAX_LIST_BYTES // 1024} KiB, or no answer in time"
            elif reply.error() == QNetworkReply.NetworkError.ContentNotFoundError:
                why = "this relay does not list swarms (an older relay?): type the swarm's name"
            else:
                why = reply.errorString()
            self.failed.emit(f"could not list the swarms at {url}: {why}")
            return
        try:
            swarms = decode_swarm_list(bytes(reply.readAll().data()))
        except ValueError as exc:
            self.failed.emit(f"{url}: {exc}")
            return
        self.listed.emit(swarms)
