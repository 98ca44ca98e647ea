/* tessera — command-line program (being written). */
int main(void) { return 0; }
