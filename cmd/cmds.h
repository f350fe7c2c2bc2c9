/* cmds.h: subcommands of the mantissa binary that live outside main.c. */
#ifndef MT_SERVER_CMDS_H
#define MT_SERVER_CMDS_H

/* argv[0] is the subcommand's name; both return a process exit code. */
int cmd_quantize(int argc, char **argv);
int cmd_compare(int argc, char **argv);

#endif
