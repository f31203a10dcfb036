import java.lang.reflect.Constructor;
import java.lang.reflect.Method;

import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServer;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * The Iceberg project's REST test server (its open-api test fixture), configured as it is, by
 * CATALOG_* variables, but listening on loopback only: its own main listens on every interface.
 * Run as a source file: java -cp '.jvm/iceberg-rest/*' jvm/iceberg-rest/LoopbackRestCatalog.java PORT
 */
public final class LoopbackRestCatalog {
  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    // The fixture's own steps (RESTCatalogServer.start), its backend catalog from CATALOG_* variables.
    Method init = RESTCatalogServer.class.getDeclaredMethod("initializeBackendCatalog");
    init.setAccessible(true);
    Constructor<RESTCatalogServer> fixture = RESTCatalogServer.class.getDeclaredConstructor();
    fixture.setAccessible(true);
    Object context = init.invoke(fixture.newInstance());
    Class<?> adapterClass = Class.forName("org.apache.iceberg.rest.RESTServerCatalogAdapter");
    Constructor<?> make = adapterClass.getDeclaredConstructor(context.getClass());
    make.setAccessible(true);
    RESTCatalogAdapter adapter = (RESTCatalogAdapter) make.newInstance(context);

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(handler);
    server.start();
    server.join();
  }
}
